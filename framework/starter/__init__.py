"""The starter-spec inferrer: a commented adapter spec, TODOs included, inferred from an
unknown checkpoint's ``config.json`` and safetensors headers (``draftsmith init``; the entry
point is :func:`.infer.infer`)."""
