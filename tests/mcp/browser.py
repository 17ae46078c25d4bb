"""The "browser" of panto's OAuth tests: follows the authorization URL it is given (the
fixture's authorization server approves at once and redirects to panto's loopback
listener) and exits 0 if panto's page says it is signed in.

    python tests/mcp/browser.py URL
"""

import sys
import urllib.request

with urllib.request.urlopen(sys.argv[1], timeout=60) as answer:
    page = answer.read().decode("utf-8", "replace")
sys.exit(0 if "panto is signed in" in page else 1)
