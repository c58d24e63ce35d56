import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A fresh self-signed certificate and its key, made at start, for serving HTTPS on 127.0.0.1.
///
/// The certificate is its own CA (`basicConstraints` CA:true, `keyCertSign`), so clients can trust it directly: as a
/// CA bundle (`requests` `verify=<path>`, `curl --cacert`) or as an extra trust root. It carries the extensions that
/// strict verifiers ask for (Python 3.13's `VERIFY_X509_STRICT`): key usage, extended key usage `serverAuth`, subject
/// and authority key identifiers, and subject alternative names for `127.0.0.1` and `localhost`.
struct TLSIdentity: Sendable {
    /// The subject and issuer common name.
    static let commonName = "tokenbroker-test-idp"

    /// How long before the start the certificate is already valid, to tolerate clock skew.
    static let backdating: TimeInterval = 3600

    /// How long after the start the certificate stays valid.
    static let lifetime: TimeInterval = 7 * 24 * 3600

    /// The certificate in PEM form, ending in a newline, as written for clients.
    let certificatePEM: String

    /// The server-side TLS context holding the certificate and its private key.
    let context: NIOSSLContext

    /// Generates a P-256 key and a certificate valid from an hour before `now` for seven days.
    init(now: Date = Date()) throws {
        // Certificates hold whole seconds, and the encoder rounds: a start at 12.7 s would make the certificate valid
        // from 13 s, in the future for the rest of that second. Truncating first makes the bounds exact.
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let key = P256.Signing.PrivateKey()
        let signingKey = Certificate.PrivateKey(key)
        let publicKey = signingKey.publicKey
        let name = try DistinguishedName { CommonName(Self.commonName) }
        let keyIdentifier = SubjectKeyIdentifier(hash: publicKey)
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
            Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            try ExtendedKeyUsage([.serverAuth])
            keyIdentifier
            AuthorityKeyIdentifier(keyIdentifier: keyIdentifier.keyIdentifier)
            SubjectAlternativeNames([
                .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                .dnsName("localhost"),
            ])
        }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: now.addingTimeInterval(-Self.backdating),
            notValidAfter: now.addingTimeInterval(Self.lifetime),
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: extensions,
            issuerPrivateKey: signingKey
        )
        let pem = try certificate.serializeAsPEM().pemString
        certificatePEM = pem.hasSuffix("\n") ? pem : pem + "\n"
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(certificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(key.derRepresentation), format: .der))
        )
        configuration.applicationProtocols = ["http/1.1"]
        context = try NIOSSLContext(configuration: configuration)
    }

    /// Writes the certificate PEM to `path`, readable by everyone (0644), replacing any file there.
    func writeCertificate(to path: String) throws {
        // Not `.atomic`: Foundation on Linux leaves an empty /tmp/TemporaryDirectory.* behind for each atomic write.
        try Data(certificatePEM.utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
    }
}
