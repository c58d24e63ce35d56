public import BrokerProtocol
public import Foundation

/// MSAL's unified cache as JSON: what `SerializableTokenCache.serialize()` writes and every MSAL reads.
///
/// Reading is per entry: one bad entry is skipped with its reason, the rest is taken. Unknown fields and
/// sections are kept and written back on export. Keys are never parsed; they are rebuilt from the fields, so two
/// entries whose fields make one key are one credential: the first in key order is taken, the other skipped.
public enum MSALCacheDocument {
    /// The entries of a document, and the ones left out with their reasons.
    public static func read(_ data: Data) throws(CacheError) -> (entries: [CacheEntry], skipped: [SkippedEntry]) {
        let root: JSONValue
        do {
            root = try StrictJSON.parse(data)
        } catch {
            throw CacheError(.invalidDocument, "the MSAL cache is not valid JSON: \(error)")
        }
        guard case .object(let sections) = root else {
            throw CacheError(.invalidDocument, "an MSAL cache is a JSON object of sections (AccessToken, Account, …)")
        }
        var entries: [CacheEntry] = []
        var skipped: [SkippedEntry] = []
        // The credentials taken: keys are rebuilt from the fields, and two entries may make one.
        var taken = Set<EntryID>()
        for (name, value) in sections.sorted(by: { $0.key < $1.key }) {
            let section = Section(name: name)
            guard case .object(let members) = value else {
                if case .other = section {
                    entries.append(.other(EntryID(section: section, key: ""), value))
                } else {
                    skipped.append(SkippedEntry(entry: name, reason: "the section is not a JSON object"))
                }
                continue
            }
            for (key, member) in members.sorted(by: { $0.key < $1.key }) {
                // An unknown section's entries are kept by their keys, and the empty key stands for a section that
                // is no object (written back whole): an entry under it would replace its section on the way out.
                if case .other = section, key.isEmpty {
                    skipped.append(SkippedEntry(entry: "\(name)/", reason: "an entry with an empty key"))
                    continue
                }
                do {
                    let entry = try CacheEntry(section: section, key: key, value: member)
                    // As an import would skip it (Protocol/ §9.6): what is read is what is written back.
                    guard taken.insert(entry.id).inserted else {
                        skipped.append(
                            SkippedEntry(entry: entry.id.description, reason: "a second entry with the same key")
                        )
                        continue
                    }
                    entries.append(entry)
                } catch {
                    skipped.append(SkippedEntry(entry: "\(name)/\(key)", reason: error.reason))
                }
            }
        }
        return (entries, skipped)
    }

    /// The JSON document for `entries`: the five MSAL sections always present, keys sorted, compact.
    public static func write(_ entries: [CacheEntry]) throws -> Data {
        var sections: [String: JSONValue] = [:]
        for section in Section.known { sections[section.name] = .object([:]) }
        for entry in entries {
            let id = entry.id
            if case .other = id.section, id.key.isEmpty {
                sections[id.section.name] = entry.value
                continue
            }
            var members = sections[id.section.name]?.objectValue ?? [:]
            members[id.key] = entry.value
            sections[id.section.name] = .object(members)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(JSONValue.object(sections))
    }
}
