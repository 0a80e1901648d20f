"""Image generation (issue 14, docs/images.md): the ``/v1/images/generations`` door's request checks, the
signed URLs of stored images, the service both the route and the ``image_generate_async`` task use, and
that task type. Model calls go through the gateway core; images are kept in the blob store."""
