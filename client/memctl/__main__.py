from memctl.launch import main

raise SystemExit(main())
