from hearth.cli import app

app()
