from autokernel_ci.cli import main

raise SystemExit(main())
