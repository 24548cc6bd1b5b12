"""Independent PyTorch reference for ctxpatch's engines (see tests/reference/README.md).

Written from the spec (../shared/spec/attention-rules.md), docs/attention-decisions.md,
docs/fire-layout.md and Hugging Face's modeling code; it never reads the C sources.
"""
