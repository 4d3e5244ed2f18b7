#!/usr/bin/env python3
"""Writes cpython_dumps.jsonl: for each JSON text (a JSON list of strings on
stdin, e.g. FuzzCanonical's and FuzzSignMessage's corpora), what CPython's
json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"),
allow_nan=False) prints with ensure_ascii False (the per-message HMAC's
form) and True (the idempotency digest's form); null where CPython raises.
Texts CPython cannot load, or whose value holds a lone surrogate (not
UTF-8, so no frame can carry it), are left out.

    python3 pyjson/testdata/cpython_dumps.py < inputs.json > pyjson/testdata/cpython_dumps.jsonl
"""
import json
import sys

EXTRA = [
    '[0.1,1e15,1e16,1e22,-0.0,5e-324,1.7976931348623157e308,12345678901234567.0,1E2,2.50,1e-7,0.0001,0.00001]',
    '[0,-0,9007199254740993,123456789012345678901234567890,-9223372036854775808,1e400,-1e400]',
    '{"b":1,"a":{"d":[true,false,null],"c":"\\u00e9<>&\\u2028\\u2029\\u007f\\u0000\\u001f"},"\\ud83d\\ude00":1,"\\ue000":2}',
]


def dumps(v, ascii_only):
    try:
        s = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False)
        s.encode("utf-8")
        return s
    except (ValueError, UnicodeEncodeError):
        return None


def main():
    seen = set()
    for text in json.load(sys.stdin) + EXTRA:
        if text in seen:
            continue
        seen.add(text)
        try:
            v = json.loads(text)
        except (ValueError, RecursionError):
            continue
        utf8, ascii_ = dumps(v, False), dumps(v, True)
        if utf8 is None and ascii_ is not None:
            continue  # a lone surrogate: ensure_ascii can print it, UTF-8 cannot
        print(json.dumps({"in": text, "utf8": utf8, "ascii": ascii_}, ensure_ascii=True))


if __name__ == "__main__":
    main()
