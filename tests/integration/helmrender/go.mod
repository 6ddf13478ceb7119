module sandbox.test/helmrender

go 1.19
