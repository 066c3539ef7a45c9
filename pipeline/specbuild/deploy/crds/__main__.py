from specbuild.deploy.crds import main

raise SystemExit(main())
