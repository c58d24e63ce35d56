public import BrokerProtocol
public import Foundation

/// Parses JSON documents from outside (imported caches) strictly: RFC 8259 only, UTF-8 checked, duplicate
/// keys and excessive nesting refused, so a hostile file cannot smuggle one value past another.
public enum StrictJSON {
    /// Parses `data`, which must be one JSON value.
    public static func parse(_ data: Data) throws(JSONSyntaxError) -> JSONValue {
        try JSONValue.parse(Array(data))
    }
}
