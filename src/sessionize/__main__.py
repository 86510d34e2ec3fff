from sessionize.cli import main

main()
