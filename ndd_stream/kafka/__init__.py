"""Everything that talks to Kafka outside the worker: client configuration (:mod:`.config`),
topic definitions (:mod:`.topics`), ``produce`` and ``tail`` (:mod:`.produce`,
:mod:`.tail`) and the embedded Tansu broker (:mod:`.broker`)."""
