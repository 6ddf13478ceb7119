module sandbox.test/strictclient

go 1.19
