/// Params of `getLinuxBrokerVersion`.
public struct GetVersionParams: Sendable, Hashable, Codable {
    /// The client's protocol version (`major.minor`); a broker of another major answers
    /// `unsupported_protocol_version`.
    public var protocolVersion: String?
    /// The client library's own version, for logs (the name Microsoft's broker uses).
    public var msalCppVersion: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case protocolVersion, msalCppVersion, correlationId
    }

    /// Creates the params.
    public init(
        protocolVersion: String? = WireProtocol.version,
        msalCppVersion: String? = nil,
        correlationId: String? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.msalCppVersion = msalCppVersion
        self.correlationId = correlationId
    }
}

/// Result of `getLinuxBrokerVersion`.
public struct VersionResult: Sendable, Hashable, Codable {
    /// The broker's release version.
    public var linuxBrokerVersion: String
    /// The protocol version the broker speaks (`major.minor`).
    public var protocolVersion: String
    /// The methods this broker serves.
    public var methods: [String]

    /// Creates the result.
    public init(linuxBrokerVersion: String, protocolVersion: String, methods: [String]) {
        self.linuxBrokerVersion = linuxBrokerVersion
        self.protocolVersion = protocolVersion
        self.methods = methods
    }
}
