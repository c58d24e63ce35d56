import BrokerProtocol

/// Cuts a cache document too large for one request into documents that each fit, entry by entry.
///
/// A request is limited to ``WireProtocol/maximumFrameBytes``, but an export may be larger; splitting lets any
/// export be imported again. Each part is imported atomically on its own.
enum ImportSplitter {
    /// One part: its document, and for an ADAL list the index in the whole list of each of its entries (the
    /// broker reports a skipped ADAL entry by its index in the part).
    struct Part {
        let text: String
        let indices: [Int]
    }

    /// The budget for one part's document text, leaving room for the request around it and for the escaping
    /// the text gets inside a JSON string (quotes and backslashes double).
    static let partBudget = WireProtocol.maximumFrameBytes / 2 - 4096

    /// The parts of `document`, or nil when it is not JSON of the format's shape (the broker then says why).
    ///
    /// Entries larger than a part on their own are returned as `oversized`, for the report.
    static func split(_ document: String, format: CacheFormat) -> (parts: [Part], oversized: [SkippedEntry])? {
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

    private static func splitMSAL(_ sections: [String: JSONValue]) -> (parts: [Part], oversized: [SkippedEntry]) {
        var parts: [Part] = []
        var oversized: [SkippedEntry] = []
        var current: [String: [String: JSONValue]] = [:]
        var currentSize = 2
        func flush() {
            guard !current.isEmpty else { return }
            parts.append(Part(text: text(.object(current.mapValues { JSONValue.object($0) })), indices: []))
            current = [:]
            currentSize = 2
        }
        for (name, section) in sections.sorted(by: { $0.key < $1.key }) {
            guard case .object(let entries) = section else {
                // Not a map of entries: sent alone so the broker can report it.
                flush()
                parts.append(Part(text: text(.object([name: section])), indices: []))
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

    private static func splitADAL(_ entries: [JSONValue]) -> (parts: [Part], oversized: [SkippedEntry]) {
        var parts: [Part] = []
        var oversized: [SkippedEntry] = []
        var current: [JSONValue] = []
        var indices: [Int] = []
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
                parts.append(Part(text: text(.array(current)), indices: indices))
                current = []
                indices = []
                currentSize = 2
            }
            current.append(entry)
            indices.append(index)
            currentSize += entrySize
        }
        if !current.isEmpty { parts.append(Part(text: text(.array(current)), indices: indices)) }
        return (parts, oversized)
    }

    /// `skipped` with ADAL list positions (`[3]`) of `part` turned into positions in the whole list.
    static func renumbered(_ skipped: [SkippedEntry], of part: Part) -> [SkippedEntry] {
        guard !part.indices.isEmpty else { return skipped }
        return skipped.map { entry in
            guard entry.entry.hasPrefix("["), entry.entry.hasSuffix("]"),
                let index = Int(entry.entry.dropFirst().dropLast()), part.indices.indices.contains(index)
            else { return entry }
            return SkippedEntry(entry: "[\(part.indices[index])]", reason: entry.reason)
        }
    }
}
