#!/usr/bin/env python3
"""Checks tokenbrokerd's journal entries (journalctl -o json): structured fields, and no secret.

usage: check_journal.py JOURNAL_JSON SECRETS_FILE
"""
import json
import sys

entries = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
secrets = [line.strip() for line in open(sys.argv[2]) if line.strip()]
passed = failed = 0


def check(name: str, condition: bool) -> None:
    global passed, failed
    print(("ok - " if condition else "FAIL - ") + name)
    passed, failed = passed + condition, failed + (not condition)


check(f"the journal holds tokenbrokerd's entries ({len(entries)})", len(entries) >= 5)
structured = [e for e in entries if e.get("_TRANSPORT") == "journal"]
check("entries come through sd_journal_sendv (structured), not as stderr lines", len(structured) >= 5)
check("every structured entry has PRIORITY, CODE_FILE, CODE_LINE, CODE_FUNC",
      all(all(k in e for k in ("PRIORITY", "CODE_FILE", "CODE_LINE", "CODE_FUNC")) for e in structured))
check("priorities are syslog's (warning 4 … debug 7)", {e["PRIORITY"] for e in structured} <= set("234567"))
check("a request's entries carry CORRELATION_ID", any("CORRELATION_ID" in e for e in structured))
check("the audit line names the caller and client, as fields",
      any("CALLER_PID" in e and "CLIENT_ID" in e for e in structured))
text = json.dumps(entries)
check(f"no token of the cache ({len(secrets)}) is in the journal",
      not any(s in text or s[:24] in text for s in secrets))
check("no verifier or code parameter is in the journal", "code_verifier" not in text and "code=" not in text)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
