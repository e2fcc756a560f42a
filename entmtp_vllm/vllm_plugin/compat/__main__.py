"""`python -m entmtp_vllm.vllm_plugin.compat`: the command line (`command_line.py`)."""

import sys

from entmtp_vllm.vllm_plugin.compat.command_line import main

if __name__ == "__main__":
    sys.exit(main())
