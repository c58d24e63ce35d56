import BrokerSettings
import BrokerTestSupport
import Foundation
import Testing

struct ConfigurationFileTests {
    /// Every key, comments, blank lines; bad lines are reported with their number, never fatal.
    @Test func readsEveryKeyAndReportsTheRest() {
        let contents = ConfigurationFile.parse(
            """
            # tokenbroker
            log-level = debug
            browser.firefox-private = firefox --private-window   # a comment
            browser.kiosk = '/opt/My Browser/browser' --kiosk %s
            system-browser = chromium --new-window

            browser.bad name = x
            browser.empty =
            log-level = loud
            surprise = 1
            no equals sign
            """
        )
        #expect(contents.logLevel == "debug")
        #expect(contents.browserProfiles["firefox-private"] == ["firefox", "--private-window"])
        #expect(contents.browserProfiles["kiosk"] == ["/opt/My Browser/browser", "--kiosk", "%s"])
        #expect(contents.systemBrowser == ["chromium", "--new-window"])
        #expect(contents.browserProfiles.count == 2)
        #expect(contents.problems.count == 5, "\(contents.problems)")
        #expect(contents.problems.allSatisfy { $0.hasPrefix("line ") })
    }

    /// `key-stores`: names in order, separated by spaces or commas; an unknown or repeated name is reported and
    /// leaves the default order.
    @Test func readsTheKeyStoresInOrder() {
        #expect(
            ConfigurationFile.parse("key-stores = tpm, secret-service file").keyStores == [
                "tpm", "secret-service", "file",
            ]
        )
        for bad in ["key-stores = keychain", "key-stores = file file", "key-stores ="] {
            let contents = ConfigurationFile.parse(bad)
            #expect(contents.keyStores == nil, "\(bad)")
            #expect(contents.problems.count == 1, "\(bad)")
        }
    }

    /// `broker1`: on or off (the Broker1 front end); anything else is reported and leaves the default.
    @Test func readsTheBroker1Switch() {
        #expect(ConfigurationFile.parse("broker1 = off").broker1 == false)
        #expect(ConfigurationFile.parse("broker1 = on").broker1 == true)
        #expect(ConfigurationFile.parse("").broker1 == nil)
        let bad = ConfigurationFile.parse("broker1 = maybe")
        #expect(bad.broker1 == nil && bad.problems == ["line 1: broker1 is on or off"])
    }

    /// The file's place: the option, else $XDG_CONFIG_HOME, else ~/.config.
    @Test func findsTheFileByTheXDGRule() {
        #expect(ConfigurationFile(path: "/etc/x.conf").url.path == "/etc/x.conf")
        #expect(
            ConfigurationFile(environment: ["XDG_CONFIG_HOME": "/c", "HOME": "/h"]).url.path
                == "/c/tokenbroker/tokenbrokerd.conf"
        )
        #expect(
            ConfigurationFile(environment: ["XDG_CONFIG_HOME": "relative", "HOME": "/h"]).url.path
                == "/h/.config/tokenbroker/tokenbrokerd.conf"
        )
    }

    /// Saving a profile replaces its line or adds one, keeps every other line, and makes the file private.
    @Test func savesAProfileKeepingTheRest() throws {
        let directory = try TemporaryDirectory(prefix: "settings")
        let file = ConfigurationFile(path: directory.path("tokenbroker/tokenbrokerd.conf"))
        try file.saveBrowserProfile("work", command: ["firefox", "-P", "work profile"])
        #expect(file.read().browserProfiles["work"] == ["firefox", "-P", "work profile"])
        try Data("# mine\nlog-level = debug\nbrowser.work = old\n".utf8).write(to: file.url)
        try file.saveBrowserProfile("work", command: ["firefox", "-P", "work"])
        try file.saveBrowserProfile("other", command: ["chromium"])
        let text = try String(contentsOf: file.url, encoding: .utf8)
        #expect(text == "# mine\nlog-level = debug\nbrowser.work = firefox -P work\nbrowser.other = chromium\n")
        let mode = try FileManager.default.attributesOfItem(atPath: file.url.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// Profile names are plain words.
    @Test(arguments: [("work", true), ("firefox-private_2", true), ("", false), ("a b", false), ("../x", false)])
    func profileNamesArePlainWords(name: String, valid: Bool) {
        #expect(ConfigurationFile.isProfileName(name) == valid)
    }

    /// Shell words: quotes, escapes, no expansion; an unclosed quote is an error; quoting reads back.
    @Test func splitsAndQuotesShellWords() {
        #expect(ShellWords.split(#"a 'b c' "d \"e\"" f\ g $HOME"#) == ["a", "b c", #"d "e""#, "f g", "$HOME"])
        #expect(ShellWords.split("'open") == nil)
        for word in ["plain", "with space", "it's", "", "$(x)"] {
            #expect(ShellWords.split(ShellWords.quote(word)) == [word])
        }
    }
}
