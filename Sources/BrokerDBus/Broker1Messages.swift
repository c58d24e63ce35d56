import BrokerProtocol
import Foundation

/// Microsoft's Linux broker interface, `com.microsoft.identity.Broker1`: its names, and the JSON its clients send
/// and accept (what MSALRuntime, sso-mib and linux-entra-sso demonstrably do; the interface is undocumented).
public enum Broker1 {
    /// The well-known name on the session bus.
    public static let busName = "com.microsoft.identity.broker1"
    /// The object path.
    public static let objectPath = "/com/microsoft/identity/broker1"
    /// The interface (capital B).
    public static let interface = "com.microsoft.identity.Broker1"

    /// The eight methods, each `sss → s` (protocol version, correlation id, request JSON → answer JSON).
    public enum Method: String, CaseIterable, Sendable {
        case getAccounts
        case acquireTokenSilently
        case acquireTokenInteractively
        case removeAccount
        case getLinuxBrokerVersion
        case cancelInteractiveFlow
        case acquirePrtSsoCookie
        case generateSignedHttpRequest
    }

    /// The Broker1 version this broker answers `getLinuxBrokerVersion` with: the interface revision whose shapes
    /// it follows (no `Introspectable`, answers in milliseconds), which the clients' version checks accept.
    public static let interfaceVersion = "2.0.1"

    /// The introspection data: the eight methods (Microsoft's broker serves none since 2.0.1; `busctl` and
    /// `gdbus introspect` show these).
    static let introspection = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
         <interface name="\(interface)">
        \(Method.allCases.map { method in
            """
              <method name="\(method.rawValue)">
               <arg type="s" name="protocolVersion" direction="in"/>
               <arg type="s" name="correlationId" direction="in"/>
               <arg type="s" name="request" direction="in"/>
               <arg type="s" name="response" direction="out"/>
              </method>
            """
        }.joined(separator: "\n"))
         </interface>
         <interface name="org.freedesktop.DBus.Peer">
          <method name="Ping"/>
          <method name="GetMachineId"><arg type="s" name="machine_uuid" direction="out"/></method>
         </interface>
         <interface name="org.freedesktop.DBus.Introspectable">
          <method name="Introspect"><arg type="s" name="xml_data" direction="out"/></method>
         </interface>
        </node>
        """
}

// MARK: - Requests

extension Broker1 {
    /// An account as a request names it: the clients send the full 14-member object, of which the broker reads
    /// the identifier and the username.
    struct AccountReference: Decodable, Sendable {
        var homeAccountId: String?
        var username: String?

        var selector: AccountSelector? {
            let selector = AccountSelector(
                identifier: homeAccountId.flatMap { $0.isEmpty ? nil : $0 },
                username: username.flatMap { $0.isEmpty ? nil : $0 }
            )
            return selector.isEmpty ? nil : selector
        }
    }

    /// `authParameters` as MSALRuntime sends it.
    ///
    /// Members the broker does not use (`accessTokenToRenew`,
    /// `additionalQueryParametersForAuthorization`, `authorizationType`, `enrollmentId`, `isSignIn`, `isTestMode`,
    /// `password`, `redirectUri`, `uxContextHandle`, …) are ignored.
    struct AuthParameters: Decodable, Sendable {
        var clientId: String?
        var authority: String?
        var requestedScopes: [String]?
        var account: AccountReference?
        var username: String?
        var decodedClaims: String?
        var prompt: String?
        var popParams: JSONValue?
    }

    /// `acquireTokenSilently`, `acquireTokenInteractively`: the account may come at the root or inside
    /// `authParameters`.
    struct TokenRequest: Decodable, Sendable {
        var authParameters: AuthParameters
        var account: AccountReference?
    }

    /// `getAccounts`: `redirectUri` is the client id again.
    struct AccountsRequest: Decodable, Sendable {
        var clientId: String?
    }

    /// `removeAccount` (sso-mib).
    struct RemoveAccountRequest: Decodable, Sendable {
        var clientId: String?
        var account: AccountReference?
    }
}

// MARK: - Answers

extension Broker1 {
    /// The account object the clients require: all 14 members, strings but for the integer `passwordExpiry`.
    struct Account: Encodable, Sendable, Hashable {
        var alternativeAccountId = ""
        var clientInfo: String
        var environment: String
        var familyName: String
        var givenName: String
        var homeAccountId: String
        var homeEnvironment: String
        var localAccountId: String
        var middleName = ""
        var name: String
        var passwordChangeUrl = ""
        var passwordExpiry: Int64 = 0
        var realm: String
        var username: String

        /// The account; `clientInfo` is Entra's when known, else built from the identifier.
        init(_ account: BrokerProtocol.Account, clientInfo: String? = nil) {
            let claims = account.accountClaims ?? [:]
            self.clientInfo = clientInfo ?? Broker1.clientInfo(of: account)
            environment = account.environment
            familyName = claims["family_name"]?.stringValue ?? ""
            givenName = claims["given_name"]?.stringValue ?? ""
            homeAccountId = account.identifier
            homeEnvironment = account.environment
            localAccountId = account.localAccountId
            name = account.name ?? claims["name"]?.stringValue ?? ""
            realm = account.realm
            username = account.username
        }
    }

    struct AccountsAnswer: Encodable, Sendable {
        var accounts: [Account]
    }

    /// A token answer: times in epoch milliseconds, `grantedScopes` the requested scopes as one string, never a
    /// refresh token (the client would store it in the user's keyring).
    struct TokenResponse: Encodable, Sendable {
        var accessToken: Secret
        /// 0 Bearer, 1 PoP.
        var accessTokenType: Int
        var expiresOn: Int64
        var extendedExpiresOn: Int64
        var clientInfo: String
        var idToken: Secret
        var grantedScopes: String
        var account: Account
    }

    struct TokenAnswer: Encodable, Sendable {
        var brokerTokenResponse: TokenResponse
    }

    struct VersionAnswer: Encodable, Sendable {
        var linuxBrokerVersion: String
        /// This broker's own release.
        var tokenbrokerVersion: String
    }

    /// An empty object: `removeAccount` and `cancelInteractiveFlow` answer with it.
    struct EmptyAnswer: Encodable, Sendable {}

    /// Entra ID's `client_info` for an account: base64url JSON `{"uid","utid"}` from its `<oid>.<tid>` identifier;
    /// empty when the identifier has no tenant part.
    static func clientInfo(of account: BrokerProtocol.Account) -> String {
        let parts = account.identifier.split(separator: ".", maxSplits: 1)
        guard parts.count == 2 else { return "" }
        let object: [String: String] = ["uid": String(parts[0]), "utid": String(parts[1])]
        guard let json = try? WireEncoder().encode(object) else { return "" }
        return Base64URL.encode(json)
    }

    /// An unsigned id token for an account the broker holds no id token for (imported without one).
    ///
    /// `alg` `none`, carrying only what the account says: MSALRuntime reads its claims to file the account and
    /// checks no signature.
    static func unsignedIdToken(for account: BrokerProtocol.Account, clientId: String) -> Secret {
        let tenant = account.realm
        var claims: [String: JSONValue] = [
            "ver": .string("2.0"),
            "aud": .string(clientId),
            "iss": .string("https://\(account.environment)/\(tenant)/v2.0"),
            "sub": .string(account.localAccountId),
            "oid": .string(account.localAccountId),
            "tid": .string(tenant),
            "preferred_username": .string(account.username),
        ]
        if let name = account.name { claims["name"] = .string(name) }
        let header = (try? WireEncoder().encode(["alg": "none", "typ": "JWT"])) ?? []
        let body = (try? WireEncoder().encode(claims)) ?? []
        return Secret(Base64URL.encode(header) + "." + Base64URL.encode(body) + ".")
    }
}

// MARK: - Errors

extension Broker1 {
    /// MSALRuntime's response status values.
    public enum Status: Int, Sendable {
        case unexpected = 0
        case interactionRequired = 2
        case noNetwork = 3
        case networkTemporarilyUnavailable = 4
        case serverTemporarilyUnavailable = 5
        case apiContractViolation = 6
        case userCanceled = 7
        case applicationCanceled = 8
        case incorrectConfiguration = 9
        case authorityUntrusted = 11
        case accountUnusable = 13
        case transientError = 15
        case accountNotFound = 19
    }

    /// The error object: `status`, `errorCode` and `tag` are required by the clients; `context` carries the broker's
    /// message for people.
    struct ErrorAnswer: Encodable, Sendable {
        struct Body: Encodable, Sendable {
            var status: Int
            var errorCode: Int
            var tag: Int
            var context: String
            var subStatus: Int
        }

        var error: Body

        init(_ status: Status, _ context: String, errorCode: ErrorCode? = nil) {
            error = Body(
                status: status.rawValue,
                errorCode: errorCode.map { abs($0.rpcCode) } ?? 0,
                tag: Broker1.tag,
                context: context,
                subStatus: 0
            )
        }
    }

    /// The `tag` of every error this broker answers ("tb" in ASCII): Microsoft's tags name a place in its code;
    /// this one tells a reader of a client's log that tokenbroker answered.
    static let tag = 0x7462
}
