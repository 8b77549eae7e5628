"""`python -m toolgym`: the `toolgym` command, for an environment whose scripts folder is not on PATH."""

from toolgym.cli import main

main()
