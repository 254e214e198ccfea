"""`python -m shardq ARGS` runs the `shardq` command line with ARGS."""
import sys

from shardq._cli import main

sys.exit(main())
