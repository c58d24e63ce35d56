#!/usr/bin/env python3
"""Validates the wire-protocol schemas and example transcripts under Protocol/.

Usage: python3 Tests/wire/validate_examples.py [--protocol-dir Protocol]

Checks:
  - every schema file under <protocol-dir>/schemas parses (strictly: no duplicate keys), is a draft 2020-12
    schema whose $id is https://tokenbroker.invalid/protocol/1/<file name>, passes check_schema, and every
    $ref in it resolves through the registry of all schemas;
  - every method and notification named in defs.json has its params (and, for methods, result) schema;
  - every example transcript under <protocol-dir>/examples has the documented shape, and each of its
    messages is valid: client messages against request.json and <method>.params.json (a message marked
    "invalid" must fail them); broker messages against broker-message.json and, responses, against
    response.json and <method>.result.json of the request they answer, or against error-response.json;
    notifications against notification.json and <name with / as .>.params.json;
  - each response's id matches an earlier, still unanswered request of the same transcript (an error response
    may carry id null), and every request with an id is answered;
  - each notification's correlationId names a running acquireTokenInteractively request;
  - every method has at least one example request and one successful response, every notification and every
    error code of defs.json appears at least once.

Prints one line per failure and a final "N examples, M messages validated" line; exits 1 on any failure.
Needs only the standard library plus jsonschema and referencing (see requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

BASE = "https://tokenbroker.invalid/protocol/1/"
DRAFT_URI = "https://json-schema.org/draft/2020-12/schema"
MAX_REQUEST_FRAME_BYTES = 1 << 20
_ABSENT = object()
ENVELOPES = (
    "request.json",
    "response.json",
    "error-response.json",
    "notification.json",
    "broker-message.json",
    "defs.json",
)

# The shape of an example transcript (this file format is documented in Protocol/examples/README.md).
TRANSCRIPT_SCHEMA: dict[str, Any] = {
    "$schema": DRAFT_URI,
    "type": "object",
    "required": ["title", "description", "messages"],
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string", "minLength": 1},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["direction"],
                "additionalProperties": False,
                "properties": {
                    "direction": {"enum": ["client", "broker"]},
                    "method": {"type": "string", "minLength": 1},
                    "message": {"type": "object"},
                    "frame": {"type": "string"},
                    "frameBytes": {"type": "integer", "minimum": 0},
                    "invalid": {"const": True},
                    "terminated": {"type": "boolean"},
                    "event": {"enum": ["connect", "shutdownWrite", "close"]},
                    "note": {"type": "string"},
                },
                "oneOf": [
                    {"required": ["message"]},
                    {"required": ["frame"]},
                    {"required": ["frameBytes"]},
                    {"required": ["event"]},
                ],
            },
        },
    },
}


class DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_strict_json(path: Path) -> Any:
    """Parses a file the way the broker parses frames: duplicate keys and NaN/Infinity are errors."""
    with path.open("rb") as file:
        data = file.read()
    text = data.decode("utf-8")  # raises on invalid UTF-8
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def id_key(value: Any) -> tuple[str, Any]:
    """A dict key that keeps 1 and "1" apart (JSON-RPC ids of different types are different ids)."""
    return (type(value).__name__, value)


def usable_id(value: Any) -> bool:
    """Whether value can be a response id: null, an integer or a string."""
    return value is None or (isinstance(value, (int, str)) and not isinstance(value, bool))


def describe_id(value: Any) -> str:
    return json.dumps(value)


def schema_errors(validator: Draft202012Validator, instance: Any) -> list[str]:
    messages = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        messages.append(f"{where}: {error.message}")
    return messages


def iter_refs(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from iter_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from iter_refs(item)


class Checker:
    def __init__(self, protocol_dir: Path) -> None:
        self.protocol_dir = protocol_dir
        self.failures: list[str] = []
        self.schemas: dict[str, Any] = {}
        self.validators: dict[str, Draft202012Validator] = {}
        self.methods: list[str] = []
        self.notifications: list[str] = []
        self.error_codes: list[str] = []
        self.examples = 0
        self.messages = 0
        self.requested: set[str] = set()
        self.succeeded: set[str] = set()
        self.notified: set[str] = set()
        self.errors_seen: set[str] = set()

    def fail(self, where: str, message: str) -> None:
        self.failures.append(f"{where}: {message}")

    # Schemas ---------------------------------------------------------------------------------------------------

    def load_schemas(self) -> None:
        schema_dir = self.protocol_dir / "schemas"
        files = sorted(schema_dir.glob("*.json"))
        if not files:
            self.fail(str(schema_dir), "no schema files")
            return
        registry = Registry()
        for path in files:
            where = f"schemas/{path.name}"
            try:
                contents = load_strict_json(path)
            except (ValueError, UnicodeDecodeError) as error:
                self.fail(where, f"not valid JSON: {error}")
                continue
            if not isinstance(contents, dict):
                self.fail(where, "a schema must be a JSON object")
                continue
            if contents.get("$schema") != DRAFT_URI:
                self.fail(where, f"$schema must be {DRAFT_URI}")
            expected_id = BASE + path.name
            if contents.get("$id") != expected_id:
                self.fail(where, f"$id must be {expected_id}, is {contents.get('$id')!r}")
            try:
                Draft202012Validator.check_schema(contents)
            except SchemaError as error:
                self.fail(where, f"not a valid draft 2020-12 schema: {error.message}")
                continue
            self.schemas[path.name] = contents
            resource = Resource.from_contents(contents, default_specification=DRAFT202012)
            registry = registry.with_resource(expected_id, resource)
        self.registry = registry.crawl()

        for name, contents in self.schemas.items():
            resolver = self.registry.resolver(base_uri=BASE + name)
            for reference in iter_refs(contents):
                try:
                    resolver.lookup(reference)
                except Unresolvable:
                    self.fail(f"schemas/{name}", f"$ref {reference} does not resolve")

        for name in ENVELOPES:
            if name not in self.schemas:
                self.fail(f"schemas/{name}", "missing")
        defs = self.schemas.get("defs.json", {}).get("$defs", {})
        self.methods = list(defs.get("methodName", {}).get("enum", []))
        self.notifications = list(defs.get("notificationName", {}).get("enum", []))
        self.error_codes = list(defs.get("knownErrorCode", {}).get("enum", []))
        if not self.methods:
            self.fail("schemas/defs.json", "$defs/methodName has no enum of methods")
        for method in self.methods:
            for kind in ("params", "result"):
                if f"{method}.{kind}.json" not in self.schemas:
                    self.fail(f"schemas/{method}.{kind}.json", f"missing (method {method})")
        for name in self.notifications:
            if self.notification_schema_name(name) not in self.schemas:
                self.fail(f"schemas/{self.notification_schema_name(name)}", f"missing (notification {name})")

        for name, contents in self.schemas.items():
            self.validators[name] = Draft202012Validator(contents, registry=self.registry)

    @staticmethod
    def notification_schema_name(name: str) -> str:
        return name.replace("/", ".") + ".params.json"

    def problems(self, schema_name: str, instance: Any) -> list[str]:
        """The schema errors of instance, for messages that are meant to be invalid."""
        validator = self.validators.get(schema_name)
        if validator is None:
            return [f"no schema {schema_name}"]
        try:
            return schema_errors(validator, instance)
        except Exception as error:
            return [f"{schema_name} could not be applied: {type(error).__name__}"]

    def validate(self, where: str, schema_name: str, instance: Any) -> bool:
        validator = self.validators.get(schema_name)
        if validator is None:
            self.fail(where, f"no schema {schema_name} to validate against")
            return False
        try:
            errors = schema_errors(validator, instance)
        except Exception as error:  # a broken schema (bad $ref, bad regex) is reported, not raised
            self.fail(where, f"{schema_name} could not be applied: {type(error).__name__}")
            return False
        for error in errors:
            self.fail(where, f"{schema_name}: {error}")
        return not errors

    # Examples --------------------------------------------------------------------------------------------------

    def check_examples(self) -> None:
        example_dir = self.protocol_dir / "examples"
        files = sorted(example_dir.glob("*.json"))
        if not files:
            self.fail(str(example_dir), "no example transcripts")
        transcript_validator = Draft202012Validator(TRANSCRIPT_SCHEMA)
        for path in files:
            where = f"examples/{path.name}"
            self.examples += 1
            try:
                transcript = load_strict_json(path)
            except (ValueError, UnicodeDecodeError) as error:
                self.fail(where, f"not valid JSON: {error}")
                continue
            shape_errors = schema_errors(transcript_validator, transcript)
            for error in shape_errors:
                self.fail(where, f"transcript shape: {error}")
            if shape_errors:
                continue
            self.check_transcript(where, transcript["messages"])

    def check_transcript(self, where: str, entries: list[dict[str, Any]]) -> None:
        pending: dict[tuple[str, Any], tuple[str, int, bool]] = {}
        interactive: dict[str, tuple[str, Any]] = {}
        for index, entry in enumerate(entries):
            at = f"{where} [{index}]"
            if "message" in entry:
                self.messages += 1
                if entry["direction"] == "client":
                    self.check_client_message(at, entry, pending, interactive, index)
                else:
                    self.check_broker_message(at, entry, pending, interactive)
            elif "frame" in entry:
                self.register_frame(at, entry, pending, index)
                if "\n" in entry["frame"]:
                    self.fail(at, "a frame never contains a raw newline")
                if entry["direction"] != "client":
                    self.fail(at, "raw frames are shown for the client only")
                if len(entry["frame"].encode("utf-8")) > MAX_REQUEST_FRAME_BYTES:
                    self.fail(at, "frame longer than the request limit; use frameBytes")
            elif "frameBytes" in entry:
                if entry["direction"] != "client":
                    self.fail(at, "frameBytes is shown for the client only")
                if entry["frameBytes"] <= MAX_REQUEST_FRAME_BYTES:
                    self.fail(at, f"frameBytes is for frames over {MAX_REQUEST_FRAME_BYTES} bytes; show the frame")
            if "terminated" in entry and "frame" not in entry:
                self.fail(at, "terminated applies to frame entries only")
        for key, (method, index, _) in pending.items():
            self.fail(f"{where} [{index}]", f"request id {describe_id(key[1])} ({method}) is never answered")

    def register_frame(
        self,
        at: str,
        entry: dict[str, Any],
        pending: dict[tuple[str, Any], tuple[str, int, bool]],
        index: int,
    ) -> None:
        """A raw frame whose id the broker can read is answered with that id (always with an error)."""
        if entry.get("terminated") is False:
            return
        try:
            parsed = json.loads(entry["frame"], object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        except ValueError:
            return
        if isinstance(parsed, dict) and "id" in parsed:
            self.register(at, parsed["id"], parsed.get("method"), index, pending, expect_error=True)

    def check_client_message(
        self,
        at: str,
        entry: dict[str, Any],
        pending: dict[tuple[str, Any], tuple[str, int, bool]],
        interactive: dict[str, tuple[str, Any]],
        index: int,
    ) -> None:
        message = entry["message"]
        method = message.get("method")
        if entry.get("method") != method:
            self.fail(at, f"entry method {entry.get('method')!r} differs from the message's method {method!r}")
        params = message.get("params")
        if entry.get("invalid"):
            # A deliberately wrong request: it must indeed break the schemas, and its answer must be an error.
            problems = self.problems("request.json", message)
            if not problems and method in self.methods:
                problems = self.problems(f"{method}.params.json", params if params is not None else {})
            if not problems:
                self.fail(at, "marked invalid, but the request is valid against the schemas")
            self.register(at, message.get("id", _ABSENT), method, index, pending, expect_error=True)
            return
        if not self.validate(at, "request.json", message):
            return
        if method in self.methods:
            self.validate(at, f"{method}.params.json", params if params is not None else {})
            self.requested.add(method)
        if "id" in message:
            key = self.register(at, message["id"], method, index, pending, expect_error=False)
            if key and method == "acquireTokenInteractively" and isinstance(params, dict) and "correlationId" in params:
                interactive[params["correlationId"]] = key

    def register(
        self,
        at: str,
        request_id: Any,
        method: Any,
        index: int,
        pending: dict[tuple[str, Any], tuple[str, int, bool]],
        expect_error: bool,
    ) -> tuple[str, Any] | None:
        """Records a request that will be answered; returns its key (None when it has no usable id)."""
        if request_id is _ABSENT:
            return None
        if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
            if not expect_error:
                self.fail(at, f"a request id is an integer or a string, not {describe_id(request_id)}")
            return None
        key = id_key(request_id)
        if key in pending:
            self.fail(at, f"request id {describe_id(request_id)} is already in flight")
        pending[key] = (method if isinstance(method, str) else "", index, expect_error)
        return key

    def check_broker_message(
        self,
        at: str,
        entry: dict[str, Any],
        pending: dict[tuple[str, Any], tuple[str, int, bool]],
        interactive: dict[str, tuple[str, Any]],
    ) -> None:
        message = entry["message"]
        if "broker-message.json" in self.validators:
            self.validate(at, "broker-message.json", message)
        if "error" in message:
            valid = self.validate(at, "error-response.json", message)
            error = message["error"]
            if valid and isinstance(error.get("data"), dict):
                self.errors_seen.add(error["data"].get("errorCode"))
            if not usable_id(message.get("id")):
                return
            if message["id"] is None:
                if "method" in entry:
                    self.fail(at, "an error response with id null answers no request; give no method")
                return
            request = self.answer(at, message["id"], pending, interactive, is_result=False)
            if request is not None and "method" in entry and entry["method"] != request:
                self.fail(at, f"entry method {entry['method']!r}, but the request called {request!r}")
        elif "result" in message:
            valid = self.validate(at, "response.json", message)
            if not usable_id(message.get("id")) or message.get("id") is None:
                return
            request = self.answer(at, message["id"], pending, interactive, is_result=True)
            if request is None or not valid:
                return
            if entry.get("method") != request:
                self.fail(at, f"entry method {entry.get('method')!r}, but the request called {request!r}")
            if request in self.methods:
                if self.validate(at, f"{request}.result.json", message["result"]):
                    self.succeeded.add(request)
        elif "method" in message:
            if not self.validate(at, "notification.json", message):
                return
            name = message["method"]
            if entry.get("method") != name:
                self.fail(at, f"entry method {entry.get('method')!r} differs from the notification's {name!r}")
            if name not in self.notifications:
                return
            if self.validate(at, self.notification_schema_name(name), message["params"]):
                self.notified.add(name)
            correlation_id = message["params"].get("correlationId")
            key = interactive.get(correlation_id)
            if key is None or key not in pending:
                self.fail(at, f"correlationId {correlation_id!r} names no running interactive request")
            if name == "webAuth/didFail" and isinstance(message["params"].get("error"), dict):
                data = message["params"]["error"].get("data")
                if isinstance(data, dict):
                    self.errors_seen.add(data.get("errorCode"))
        else:
            self.fail(at, "a broker message is a response (result or error) or a notification (method, no id)")

    def answer(
        self,
        at: str,
        request_id: Any,
        pending: dict[tuple[str, Any], tuple[str, int, bool]],
        interactive: dict[str, tuple[str, Any]],
        is_result: bool,
    ) -> str | None:
        key = id_key(request_id)
        if key not in pending:
            self.fail(at, f"response id {describe_id(request_id)} matches no earlier unanswered request")
            return None
        method, _, expect_error = pending.pop(key)
        if expect_error and is_result:
            self.fail(at, f"request {describe_id(request_id)} was invalid, yet it got a result")
        for correlation_id, running in list(interactive.items()):
            if running == key:
                del interactive[correlation_id]
        return method

    # Coverage --------------------------------------------------------------------------------------------------

    def check_coverage(self) -> None:
        for method in self.methods:
            if method not in self.requested:
                self.fail("examples", f"no example request for method {method}")
            if method not in self.succeeded:
                self.fail("examples", f"no example successful response for method {method}")
        for name in self.notifications:
            if name not in self.notified:
                self.fail("examples", f"no example of notification {name}")
        for code in self.error_codes:
            if code not in self.errors_seen:
                self.fail("examples", f"no example error with errorCode {code}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = Path(__file__).resolve().parent.parent.parent / "Protocol"
    parser.add_argument(
        "--protocol-dir",
        type=Path,
        default=default_dir,
        help=f"the Protocol directory (default: {default_dir})",
    )
    options = parser.parse_args(argv)
    protocol_dir = options.protocol_dir.resolve()
    checker = Checker(protocol_dir)
    if not protocol_dir.is_dir():
        checker.fail(str(protocol_dir), "not a directory")
    else:
        checker.load_schemas()
        if "request.json" in checker.validators:
            checker.check_examples()
            checker.check_coverage()
    for failure in checker.failures:
        print(f"FAIL {failure}")
    print(f"{checker.examples} examples, {checker.messages} messages validated")
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
