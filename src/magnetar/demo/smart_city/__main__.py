import sys

from magnetar.demo.smart_city.cli import main

sys.exit(main())
