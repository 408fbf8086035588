"""``python -m hero.launch …`` is ``python -m hero.dispatch …`` (the CLI's name before dispatch
became the package ``hero/dispatch/``); kept so that existing commands and scripts still work."""
import sys

from hero.dispatch.__main__ import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m hero.launch"))
