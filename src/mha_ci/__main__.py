from mha_ci.cli import main

raise SystemExit(main())
