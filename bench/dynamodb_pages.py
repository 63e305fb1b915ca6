"""Decoding a Query page of Live Activity sessions: botocore's response parser vs the project's page hook.

    python bench/dynamodb_pages.py [--items 10000] [--rounds 10]

Builds one Query response body shaped like a match's session re-read (the projected attributes, 160-hex-digit
tokens), checks that both paths give the same items, and prints the CPU time per page for each and their
ratio as one JSON line. No server is involved: this measures the decoding alone, which botocore's parser
makes a large share of a busy daemon's CPU. The current figure is in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import time

import botocore.session
from botocore.parsers import create_parser

from daemon.store.dynamo import _items_as_sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    shape = botocore.session.get_session().get_service_model("dynamodb").operation_model("Query").output_shape
    assert shape is not None, "botocore's DynamoDB model has a Query output shape"
    items = [
        {
            "visitorKey": {"S": f"user-{i:06d}#device-{i:06d}"},
            "userId": {"S": f"user-{i:06d}"},
            "updateToken": {"S": f"{i:0160x}"},
            "status": {"S": "active"},
        }
        for i in range(args.items)
    ]
    body = json.dumps({"Items": items, "Count": len(items), "ScannedCount": len(items)}).encode()

    def botocore_parse() -> list[dict[str, object]]:
        page = {"status_code": 200, "headers": {}, "body": body}
        return create_parser("json").parse(page, shape)["Items"]

    def with_hook() -> list[dict[str, object]]:
        page: dict[str, object] = {"status_code": 200, "headers": {}, "body": body}
        custom: dict[str, object] = {}
        _items_as_sent(response_dict=page, customized_response_dict=custom)
        parsed = create_parser("json").parse(page, shape)
        parsed.update(custom)
        return parsed["Items"]

    if botocore_parse() != with_hook():
        raise SystemExit("the two decodings differ")
    figures = {}
    for name, fn in (("botocore_ms", botocore_parse), ("hook_ms", with_hook)):
        started = time.process_time()
        for _ in range(args.rounds):
            fn()
        figures[name] = round((time.process_time() - started) / args.rounds * 1000, 1)
    figures["ratio"] = round(figures["botocore_ms"] / max(figures["hook_ms"], 1e-9), 1)
    print(json.dumps({"items_per_page": args.items, **figures}))


if __name__ == "__main__":
    main()
