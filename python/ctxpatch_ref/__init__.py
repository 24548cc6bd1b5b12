"""ctxpatch's Python side: the independent references and the helpers the tests, the goldens,
bench/ and lab/ share (python/README.md).

    torchref   the PyTorch reference of the engines (float64, written from the spec, never from C)
    stio       safetensors / torch.save zip / JSON writers and a safetensors reader
    bpe        the probe models' byte-level BPE (stdlib only)
    data       the probe models' synthetic and natural-text samples (stdlib only)
    nets       the probe models' batched float32 PyTorch modules (training and evaluation)
    probes     a probe model folder as nets modules or as a torchref model

Importable once python/ is on sys.path: the tests' environment sets PYTHONPATH
(tests/CMakeLists.txt), and scripts/py does the same for a script run by hand.
"""
