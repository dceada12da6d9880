import sys

from magnetar.cli.main import main

sys.exit(main())
