"""`python3 -m pydoca ...`: the pydoca command line."""
import sys

from pydoca.cli.main import main

sys.exit(main())
