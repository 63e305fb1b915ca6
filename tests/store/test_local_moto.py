"""The single-threaded moto server the tests and the demo run on."""

from __future__ import annotations

import socket

import boto3
from botocore.config import Config

from daemon.store.local import MotoServer


def test_a_client_gone_quiet_mid_request_does_not_hold_the_only_thread() -> None:
    with MotoServer() as server:
        stalled = socket.create_connection((server.host, server.port))
        try:
            # the headers and a piece of the body, then nothing (a link blackholed mid-request)
            stalled.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
                b'X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 500\r\n\r\n{"Lim'
            )
            client = boto3.client(
                "dynamodb",
                endpoint_url=server.url,
                region_name="eu-west-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=Config(read_timeout=30, retries={"max_attempts": 1}),
            )
            # served once the stalled request is cut off (3 s), well inside the client's 30 s
            assert client.list_tables()["TableNames"] == []
        finally:
            stalled.close()
