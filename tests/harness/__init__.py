"""Harnesses that run beside the daemon in tests and benchmarks: the cluster and fault rigs, the fault and
lazy proxies, the DynamoDB throttle, the dynalite installer and the nginx wrapper. Not shipped: the wheel
and the image carry only ``daemon`` and ``actors``; benchmarks put the project root on ``sys.path``."""
