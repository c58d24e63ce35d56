import Foundation
import NIOHTTP1

/// An OAuth error as Entra ID's token endpoint reports it: `error`, an `AADSTS` code, and maybe a `suberror`.
struct EntraError: Error, Sendable {
    /// The HTTP status (400 unless said otherwise).
    var status: HTTPResponseStatus

    /// The OAuth `error` code.
    let error: String

    /// The `error_description` text, starting with the `AADSTS` code.
    let description: String

    /// The numeric `error_codes`.
    let codes: [Int]

    /// The `suberror`, when there is one.
    var suberror: String?

    /// A `Retry-After` value in seconds, sent as a header.
    var retryAfter: Int?

    /// Whether the description gets Entra's trace id, correlation id and timestamp lines appended.
    var appendsTrace = true

    /// An error whose description is `AADSTS<code>: <message>`.
    init(
        _ error: String,
        code: Int,
        _ message: String,
        suberror: String? = nil,
        status: HTTPResponseStatus = .badRequest
    ) {
        self.status = status
        self.error = error
        description = "AADSTS\(code): \(message)"
        codes = [code]
        self.suberror = suberror
    }

    /// An error with a description given verbatim, sent without trace lines.
    init(error: String, description: String, codes: [Int], suberror: String?, status: HTTPResponseStatus) {
        self.status = status
        self.error = error
        self.description = description
        self.codes = codes
        self.suberror = suberror
        appendsTrace = false
    }

    /// `invalid_request` for a parameter the request lacks.
    static func missing(_ parameter: String) -> EntraError {
        EntraError(
            "invalid_request",
            code: 900_144,
            "The request body must contain the following parameter: '\(parameter)'."
        )
    }

    /// `invalid_request` for a v1 token request (`oauth2/token`) without `resource`, shaped like Entra's AADSTS50001.
    static var missingResource: EntraError {
        EntraError(
            "invalid_request",
            code: 50001,
            "The request body must contain the following parameter: 'resource'. The v1 token endpoint needs the "
                + "resource the access token is for."
        )
    }

    /// `unsupported_grant_type` for a `grant_type` the endpoint does not redeem.
    static func unsupportedGrantType(_ grantType: String) -> EntraError {
        EntraError("unsupported_grant_type", code: 70003, "The app requested an unsupported grant type '\(grantType)'.")
    }

    /// `invalid_client` for a client id the tenant does not know.
    static func unknownClient(_ clientID: String, tenantID: String) -> EntraError {
        EntraError(
            "invalid_client",
            code: 700_016,
            "Application with identifier '\(clientID)' was not found in the directory '\(tenantID)'. "
                + "This can happen if the application has not been installed by the administrator of the tenant or "
                + "consented to by any user in the tenant."
        )
    }

    /// `invalid_tenant` for a `{tenant}` path segment that is not this tenant.
    static func unknownTenant(_ tenant: String) -> EntraError {
        EntraError(
            "invalid_tenant",
            code: 90002,
            "Tenant '\(tenant)' not found. Check to make sure you have the correct tenant ID and are signing into the "
                + "correct cloud."
        )
    }

    /// The JSON response, with Entra's trace id, correlation id and timestamp in the body (and the description).
    func response(correlationID: String, now: Date = Date()) -> HTTPResponse {
        let traceID = Random.uuid()
        let timestamp = now.formatted(.iso8601).replacingOccurrences(of: "T", with: " ")
        let trace = "\r\nTrace ID: \(traceID)\r\nCorrelation ID: \(correlationID)\r\nTimestamp: \(timestamp)"
        let body = EntraErrorBody(
            error: error,
            errorDescription: appendsTrace ? description + trace : description,
            errorCodes: codes,
            timestamp: timestamp,
            traceID: traceID,
            correlationID: correlationID,
            suberror: suberror
        )
        var response = HTTPResponse.json(body, status: status)
        if let retryAfter { response.headers.add(name: "Retry-After", value: String(retryAfter)) }
        return response
    }
}

/// The JSON body of an Entra ID error; `suberror` is left out when there is none.
struct EntraErrorBody: Encodable {
    let error: String
    let errorDescription: String
    let errorCodes: [Int]
    let timestamp: String
    let traceID: String
    let correlationID: String
    let suberror: String?

    enum CodingKeys: String, CodingKey {
        case error
        case errorDescription = "error_description"
        case errorCodes = "error_codes"
        case timestamp
        case traceID = "trace_id"
        case correlationID = "correlation_id"
        case suberror
    }
}
