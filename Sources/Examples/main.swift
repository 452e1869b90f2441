print("Examples: coming with the loopback server")
