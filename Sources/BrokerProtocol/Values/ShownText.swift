/// A client's string as a message or log line may repeat it: at most 64 characters, control characters dropped,
/// `…` when cut.
package func shown(_ text: String) -> String {
    let scalars = text.unicodeScalars.prefix(64).filter { $0.value >= 0x20 && $0.value != 0x7f }
    return String(String.UnicodeScalarView(scalars)) + (text.unicodeScalars.count > 64 ? "…" : "")
}
