extension Result where Success: Sendable {
    /// The outcome of `body`: its value, or the failure it threw (the async, typed-throws form of
    /// `Result(catching:)`, for tasks whose callers decide what a failure means).
    static func capturing(_ body: () async throws(Failure) -> Success) async -> Result {
        do throws(Failure) {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }
}
