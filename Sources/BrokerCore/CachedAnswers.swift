import BrokerCache
package import BrokerProtocol
import Foundation

/// Answers to silent requests that the cache gave at once, kept encoded: the next identical request gets the same
/// bytes with its own id and correlation id spliced in, without validating, looking up or encoding again.
///
/// An answer holds while the cache's contents are those it was worked out from (their ``TokenCache/generation``)
/// and the clock is inside the seconds in which the same lookup gives the same token: from when it was worked out
/// until the token stops being fresh, or another token for the request would become fresh (one cached "in the
/// future" by a skewed clock). A clock that went back, a change to the cache, or a full table means working it out
/// again. Requests are keyed by all their auth parameters, so two requests that differ in anything never share
/// an answer.
final class CachedAnswers: Sendable {
    /// Held by reference: a lookup hands it out without copying its template and issue.
    final class Answer: Sendable {
        let generation: UInt64
        let seconds: Range<Int64>
        let template: ResponseTemplate
        let issue: AuditLog.TokenIssue

        init(generation: UInt64, seconds: Range<Int64>, template: ResponseTemplate, issue: AuditLog.TokenIssue) {
            self.generation = generation
            self.seconds = seconds
            self.template = template
            self.issue = issue
        }

        /// Whether the answer holds at `now` for the cache's `generation`.
        func holds(generation: UInt64, now: Int64) -> Bool {
            self.generation == generation && seconds.contains(now)
        }
    }

    /// The most requests remembered; past it the table starts again (apps ask for a few tokens over and over).
    static let capacity = 1024

    private let answers = ReadWriteLocked<[HashedAuthParameters: Answer]>([:])

    /// The answer for `parameters` if it holds at `now` for the cache's `generation`.
    func answer(for parameters: HashedAuthParameters, generation: UInt64, now: Int64) -> Answer? {
        guard let answer = answers.read({ $0[parameters] }), answer.holds(generation: generation, now: now) else {
            return nil
        }
        return answer
    }

    /// Remembers the answer a lookup gave.
    func remember(_ answer: Answer, for parameters: HashedAuthParameters) {
        answers.write { answers in
            if answers.count >= Self.capacity, answers[parameters] == nil { answers.removeAll(keepingCapacity: true) }
            answers[parameters] = answer
        }
    }
}

extension TokenBroker {
    /// The response line for a silent request whose answer is remembered (see ``CachedAnswers``).
    ///
    /// A cached token, answered as ``answerSilently(_:caller:)`` would, with its audit line; nil when nothing is
    /// remembered for the request, or what is no longer holds. The request is given by what the answer needs of it:
    /// the key of its auth parameters and its correlation id (nil for a new one).
    ///
    /// `held` is the answer this function gave the caller for the same `key` before, if the caller kept it: while it
    /// holds it is answered again without the table's lock and lookup (for the same cache contents and second, the
    /// table could give no other). It is set to the answer given, nil when there is none.
    package func rememberedAnswer(
        for key: HashedAuthParameters,
        correlationId: String?,
        id: RequestID,
        caller: Caller,
        held: inout HeldAnswer?
    ) -> ResponseLine? {
        guard let cache = vault.cache else { return nil }
        let (generation, now) = (cache.generation, nowSeconds)
        if held?.answer.holds(generation: generation, now: now) != true {
            held = cachedAnswers.answer(for: key, generation: generation, now: now).map(HeldAnswer.init)
        }
        guard let answer = held?.answer else { return nil }
        let correlationId = correlationId ?? WireProtocol.newCorrelationId()
        audit.tokenIssued(answer.issue, to: caller, correlationId: correlationId)
        return ResponseLine(answer.template, id: id, correlationId: correlationId)
    }
}

/// A remembered answer as its caller keeps it for the next identical request (see
/// ``TokenBroker/rememberedAnswer(for:correlationId:id:caller:held:)``).
package struct HeldAnswer: Sendable {
    fileprivate let answer: CachedAnswers.Answer
}
