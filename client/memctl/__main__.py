from memctl.cli import main

raise SystemExit(main())
