"""Everything that talks to Kafka outside the worker: client configuration (:mod:`.config`),
topic definitions (:mod:`.topics`), ``produce`` and ``tail`` (:mod:`.produce`,
:mod:`.tail`), the embedded Tansu broker (:mod:`.broker`), and the worker's direct reads
past Faust's consumer (:mod:`.reads`)."""
