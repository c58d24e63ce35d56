#!/bin/bash
# The README's Swift example, built exactly as printed, in a package of its own that depends on this checkout
# (as an app's package would): `import BrokerClient` alone must bring every name it uses.
#
# Beside it, two checks of the names an app sees:
# - every public type of BrokerClient and BrokerProtocol can be named in a file that also imports Foundation
#   (an `extension` of each: an ambiguous name, such as a `Notification`, fails to compile);
# - no two types of the project's modules share a name (an app or a test importing two of them would have to
#   qualify it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

duplicates=$(grep -rhoE '^(public |package )?(final )?(struct|enum|class|protocol|actor|typealias) [A-Za-z_][A-Za-z0-9_]*' \
  "$ROOT/Sources" | awk '{print $NF}' | sort | uniq -d)
if [ -n "$duplicates" ]; then
  echo "FAIL - types of the same name in two modules: $duplicates"
  exit 1
fi
echo "ok - no two types of the project's modules share a name"

# SwiftPM names a package by its location: the repository's name for a URL, the directory's for a path.
IDENTITY=$(basename "$ROOT" | tr '[:upper:]' '[:lower:]')
mkdir -p "$WORK/Sources/ReadmeExample"
cat > "$WORK/Package.swift" <<SWIFT
// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "ReadmeExample",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: "$ROOT")],
    targets: [
        .executableTarget(
            name: "ReadmeExample",
            dependencies: [.product(name: "BrokerClient", package: "$IDENTITY")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        )
    ]
)
SWIFT

# The Swift blocks of "For app developers", in order, as one program.
python3 - "$ROOT/README.md" "$WORK/Sources/ReadmeExample/main.swift" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("## For app developers", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"^( *)```swift\n(.*?)^\1```", section, flags=re.S | re.M)
if len(blocks) < 2:
    sys.exit(f"expected the README's Swift blocks, found {len(blocks)}")
code = []
for indent, body in blocks:
    code.append("\n".join(line[len(indent):] for line in body.split("\n")))
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(code))
PY

{
  echo "import BrokerClient"
  echo "import Foundation"
  echo
  grep -rhoE '^public (final )?(struct|enum|class|protocol|actor|typealias) [A-Za-z_][A-Za-z0-9_]*' \
    "$ROOT/Sources/BrokerClient" "$ROOT/Sources/BrokerProtocol" | awk '{print "extension " $NF " {}"}' | sort -u
} > "$WORK/Sources/ReadmeExample/Names.swift"
echo "# $(grep -c '^extension' "$WORK/Sources/ReadmeExample/Names.swift") public types named beside Foundation"

if ! swift build --package-path "$WORK" --scratch-path "$ROOT/.build-readme" > "$WORK/build.log" 2>&1; then
  echo "FAIL - the README's example does not build:"
  grep -E "error|note" "$WORK/build.log" | head -30
  exit 1
fi
# Two warnings are SwiftPM's about the package graph, not the example's code: a dependency's stray file, and the
# `-pthread` that glib's pkg-config file (through libsecret's, for the daemon's key store) asks for and SwiftPM
# drops (glibc has the threads anyway).
if grep -E "warning: " "$WORK/build.log" | grep -v -e "unhandled; explicitly declare them" \
  -e "prohibited flag(s): -pthread"; then
  echo "FAIL - the README's example builds with warnings"
  exit 1
fi
echo "ok - the README's Swift example builds with only 'import BrokerClient', and no public name is ambiguous beside Foundation"
