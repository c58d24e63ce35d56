import BrokerProtocol
import Foundation
import Glibc
import Testing

/// Protocol/ §2.1: where daemon and clients look for the socket, and rule 5's check of its directory (the socket-rule
/// suite runs the built binaries as root and as another user; this holds without root).
struct SocketLocationTests {
    @Test func theRulesInOrder() {
        let uid: UInt32 = 4_000_000  // nobody has /run/user/4000000: rule 3 never applies
        #expect(SocketLocation.resolve(environment: ["TOKENBROKER_SOCKET": "/x/b.sock"], uid: uid) == "/x/b.sock")
        #expect(
            SocketLocation.resolve(environment: ["TOKENBROKER_SOCKET": "", "XDG_RUNTIME_DIR": "/run/u"], uid: uid)
                == "/run/u/tokenbroker/broker.sock"
        )
        #expect(
            SocketLocation.resolve(environment: ["XDG_RUNTIME_DIR": "relative"], uid: uid)
                == "/tmp/tokenbroker-4000000/broker.sock"
        )
        #expect(SocketLocation.resolve(environment: [:], uid: uid) == "/tmp/tokenbroker-4000000/broker.sock")
    }

    /// A directory of the user's own, closed to others, passes; everything else is named for what it is.
    @Test func theDirectoryMustBeTheUsersAlone() throws {
        let root = URL(filePath: NSTemporaryDirectory()).appending(path: "socket-location-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let own = root + "/own"
        #expect(mkdir(own, 0o700) == 0)
        #expect(chmod(own, 0o700) == 0)
        #expect(SocketLocation.directoryProblem(ofSocket: own + "/broker.sock") == nil)

        #expect(chmod(own, 0o750) == 0)
        #expect(
            SocketLocation.directoryProblem(ofSocket: own + "/broker.sock")
                == .untrusted("\(own) is open to other users (mode 750)")
        )

        let link = root + "/link"
        #expect(symlink(own, link) == 0)
        #expect(
            SocketLocation.directoryProblem(ofSocket: link + "/broker.sock") == .untrusted("\(link) is a symbolic link")
        )

        let file = root + "/file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        #expect(
            SocketLocation.directoryProblem(ofSocket: file + "/broker.sock") == .untrusted("\(file) is not a directory")
        )

        #expect(SocketLocation.directoryProblem(ofSocket: root + "/missing/broker.sock") == .missing(root + "/missing"))

        // Another user's: as seen by a user who is not its owner.
        #expect(chmod(own, 0o700) == 0)
        #expect(
            SocketLocation.directoryProblem(ofSocket: own + "/broker.sock", uid: getuid() + 1)
                == .untrusted("\(own) belongs to another user (uid \(getuid()))")
        )
    }
}
