from memoryd.cli import entry

entry()
