"""Test and benchmark tools that run beside the daemon (fault proxy). Never imported by production code."""
