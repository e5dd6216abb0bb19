"""Support: the story of one scrap, summary or job (`explain`), and another chance for exhausted
targets (`redrive`)."""
