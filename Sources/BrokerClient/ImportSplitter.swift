import BrokerProtocol

/// Cuts a cache document too large for one request into documents that each fit, entry by entry.
///
/// A request is limited to ``WireProtocol/maximumFrameBytes``, but an export may be larger; splitting lets any
/// export be imported again. Each part is imported atomically on its own.
enum ImportSplitter {
    /// The budget for one part's document text, leaving room for the request around it and for the escaping
    /// the text gets inside a JSON string (quotes and backslashes double).
    static let partBudget = WireProtocol.maximumFrameBytes / 2 - 4096

    /// The parts of `document`, or nil when it is not JSON of the format's shape (the broker then says why).
    ///
    /// Entries larger than a part on their own are returned as `oversized`, for the report.
    static func split(_ document: String, format: CacheFormat) -> (parts: [String], oversized: [SkippedEntry])? {
        guard let root = try? JSONValue.parse(Array(document.utf8)) else { return nil }
        switch (format, root) {
        case (.msal, .object(let sections)): return splitMSAL(sections)
        case (.adal, .array(let entries)): return splitADAL(entries)
        default: return nil
        }
    }

    private static func size(_ value: JSONValue) -> Int {
        (try? WireEncoder().encode(value).count) ?? Int.max
    }

    private static func text(_ value: JSONValue) -> String {
        String(decoding: (try? WireEncoder().encode(value)) ?? [], as: UTF8.self)
    }

    private static func splitMSAL(_ sections: [String: JSONValue]) -> (parts: [String], oversized: [SkippedEntry]) {
        var parts: [String] = []
        var oversized: [SkippedEntry] = []
        var current: [String: [String: JSONValue]] = [:]
        var currentSize = 2
        func flush() {
            guard !current.isEmpty else { return }
            parts.append(text(.object(current.mapValues { JSONValue.object($0) })))
            current = [:]
            currentSize = 2
        }
        for (name, section) in sections.sorted(by: { $0.key < $1.key }) {
            guard case .object(let entries) = section else {
                // Not a map of entries: sent alone so the broker can report it.
                flush()
                parts.append(text(.object([name: section])))
                continue
            }
            for (key, entry) in entries.sorted(by: { $0.key < $1.key }) {
                let entrySize = size(entry) + key.utf8.count + name.utf8.count + 8
                guard entrySize <= partBudget else {
                    oversized.append(
                        SkippedEntry(entry: "\(name)/\(key)", reason: "the entry alone is larger than a request may be")
                    )
                    continue
                }
                if currentSize + entrySize > partBudget { flush() }
                current[name, default: [:]][key] = entry
                currentSize += entrySize
            }
        }
        flush()
        return (parts, oversized)
    }

    private static func splitADAL(_ entries: [JSONValue]) -> (parts: [String], oversized: [SkippedEntry]) {
        var parts: [String] = []
        var oversized: [SkippedEntry] = []
        var current: [JSONValue] = []
        var currentSize = 2
        for (index, entry) in entries.enumerated() {
            let entrySize = size(entry) + 1
            guard entrySize <= partBudget else {
                oversized.append(
                    SkippedEntry(entry: "[\(index)]", reason: "the entry alone is larger than a request may be")
                )
                continue
            }
            if currentSize + entrySize > partBudget, !current.isEmpty {
                parts.append(text(.array(current)))
                current = []
                currentSize = 2
            }
            current.append(entry)
            currentSize += entrySize
        }
        if !current.isEmpty { parts.append(text(.array(current))) }
        return (parts, oversized)
    }
}
