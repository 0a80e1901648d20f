"""The OpenAI Files and Batch APIs, run by the task engine (docs/batches.md).

``file_store`` keeps uploaded and produced JSONL (bytes in the blob store); ``input_file`` reads and checks an
input file; ``service`` creates, reads, cancels and lists batches; ``batch_task`` is the task type that runs one
batch, through ``executor`` (each line a gateway call, its answer recorded once in ``batch_items`` by
``batch_store``) and then assembles its output files (``output_lines``).
"""
