import sys

from vit_keras.demo.run import main

sys.exit(main())
