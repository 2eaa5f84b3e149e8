from memctl.launch import entry

entry()
