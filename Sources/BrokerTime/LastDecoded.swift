public import Synchronization

/// The last value decoded from one kind of input: for the parts of a provider's answers that repeat from one refresh
/// to the next (an account's `client_info`, the id token's protected header, the scopes a token is granted), which
/// are then decoded once.
///
/// One entry, so what it holds stays small and never grows; inputs that alternate (two accounts refreshing in turn)
/// are decoded each time, as without it. Only for inputs that are no secret.
///
/// Public and inlinable, in a module no product exports, so that each user's module specializes it for its types:
/// `package` declarations, even inlinable ones, are called across a module's boundary as generic code, the types'
/// witness tables and metadata looked up at run time (some 3,000 instructions a call here).
public final class LastDecoded<Input: Equatable & Sendable, Output: Sendable>: Sendable {
    @usableFromInline let last: Mutex<(input: Input, output: Output)?>

    /// Nothing decoded yet.
    @inlinable public init() {
        last = Mutex(nil)
    }

    /// What `decode` makes of `input`: the last answer when `input` equals the last one decoded; nil when `decode`
    /// refuses it (a refusal is not kept).
    @inlinable public func value(of input: Input, _ decode: (Input) -> Output?) -> Output? {
        if let output = remembered(for: input) { return output }
        guard let output = decode(input) else { return nil }
        last.withLock { $0 = (input, output) }
        return output
    }

    /// What `decode`, which refuses nothing, makes of `input`; the last answer when `input` equals the last one.
    @inlinable public func value(of input: Input, _ decode: (Input) -> Output) -> Output {
        if let output = remembered(for: input) { return output }
        let output = decode(input)
        last.withLock { $0 = (input, output) }
        return output
    }

    /// The last answer, when `input` equals the last input; compared under the lock, so a miss copies nothing out.
    @inlinable func remembered(for input: Input) -> Output? {
        last.withLock { last in last.flatMap { $0.input == input ? $0.output : nil } }
    }
}
