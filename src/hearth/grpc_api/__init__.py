"""The gRPC door (seed 002 §4.2): ``hearth.v1.AiService``, health checking and reflection, served by the HTTP
process when ``grpc_port`` is set. Named ``grpc_api`` so it never shadows the ``grpc`` library; the
generated messages live in :mod:`hearth.v1` (the proto package's own path). See docs/grpc.md."""
