from llmopt.cli import main

main()
