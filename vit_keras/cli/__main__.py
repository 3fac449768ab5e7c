import sys

from vit_keras.cli import main

sys.exit(main())
