"""The rules of the HF config's companions (check_hf_config_given, rope_fields.hpp),
which posenc rope and posenc attention check alike before the config file is read: one
case per rule, shared by tests/python/test_rope_fields.py and test_attention_fields.py.

Each case is (command-line words, Python keywords, message): the message names each field
as `{name}`, which a test fills with the option (`--hf-config`) for the command line's
stderr and with the keyword (`hf_config`) for the Python exception."""

# The fields the messages name.
NAMES = ("layer", "hf_config", "hf_version")

CASES = [
    (["--layer", "0"], {"layer": 0}, "{layer}: needs {hf_config}"),
    # --layer -1 was taken for no --layer on the command line.
    (["--hf-config", "c.json", "--layer", "-1"], {"hf_config": "c.json", "layer": -1},
     "{layer}: must be a layer index >= 0, got -1"),
    # Without --rope the attention module read no hf_version: the file was read (and
    # missing, exit 3).
    (["--hf-config", "c.json", "--hf-version", "3"], {"hf_config": "c.json", "hf_version": "3"},
     "{hf_version}: release 3.0 is not one posenc models (4.43, the first with "
     "modeling_rope_utils, to 5.x)"),
]

IDS = ["layer", "layer-1", "hf_version"]
