import BrokerCache
import Testing

@testable import BrokerCore

/// The halves of an Entra ID home account id (`uid.utid`): the home tenant a lookup falls back to, and the routing
/// hint a refresh sends (`X-AnchorMailbox`).
struct HomeAccountIdTests {
    func account(_ homeAccountId: String) -> AccountEntry {
        AccountEntry(
            homeAccountId: homeAccountId,
            environment: "login.microsoftonline.com",
            realm: "t",
            localAccountId: "u",
            username: "ada@contoso.com"
        )
    }

    @Test func splitsUidDotUtid() {
        let entra = account("00000000-0000-4000-8000-00000000ada0.7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a")
        #expect(entra.homeTenant == "7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a")
        #expect(
            entra.anchorMailbox
                == "Oid:00000000-0000-4000-8000-00000000ada0@7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"
        )
    }

    /// Anything but two non-empty halves around one dot names no Entra ID home: a generic provider's `sub`, say.
    @Test(arguments: ["sub-1", "", ".", "a.", ".b", "a..b", "a.b.c", "a.b."])
    func findsNoHalvesInAnyOtherForm(homeAccountId: String) {
        #expect(account(homeAccountId).homeAccountIdHalves == nil)
        #expect(account(homeAccountId).anchorMailbox == nil)
        #expect(account(homeAccountId).homeTenant == nil)
    }
}
