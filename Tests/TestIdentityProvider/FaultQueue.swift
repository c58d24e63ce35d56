/// Faults waiting for token endpoint requests, applied in the order they were queued.
struct FaultQueue: Sendable {
    private var faults: [Fault] = []

    /// How many requests the queued faults still apply to.
    var left: Int { faults.reduce(0) { $0 + $1.remaining } }

    /// Queues a fault behind the others.
    mutating func append(_ fault: Fault) {
        faults.append(fault)
    }

    /// Takes one use of the first fault that applies to a request with `grantType`, if any.
    mutating func take(grantType: String?) -> Fault? {
        guard let index = faults.firstIndex(where: { $0.matches(grantType: grantType) }) else { return nil }
        let fault = faults[index]
        faults[index].remaining -= 1
        if faults[index].remaining <= 0 { faults.remove(at: index) }
        return fault
    }

    /// Drops every queued fault.
    mutating func removeAll() {
        faults.removeAll()
    }
}
