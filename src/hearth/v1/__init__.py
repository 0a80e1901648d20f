"""Generated from proto/hearth/v1/ai_service.proto by ``make proto`` (grpcio-tools): do not edit.

The module path mirrors the proto package ``hearth.v1``, which is what the generated ``*_pb2_grpc`` imports
expect; the server that uses them is :mod:`hearth.grpc_api`.
"""
