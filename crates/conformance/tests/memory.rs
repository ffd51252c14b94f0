//! Every conformance suite on the in-memory backend (`sluice_testkit`'s stores): the
//! simulation runs the core over stores that honour the contract every backend honours, so
//! the in-memory ones pass the same cases as the embedded backend and the AWS adapters.

mod store {
    use sluice_conformance::memory::memory;
    use sluice_conformance::store::Purge;

    sluice_conformance::store_conformance_suite!(memory(), Purge::Deletes);
}

mod log {
    use sluice_conformance::memory::memory;

    sluice_conformance::log_conformance_suite!(memory());
}

mod group {
    use sluice_conformance::memory::memory;

    sluice_conformance::group_conformance_suite!(memory());
}

mod queue {
    use sluice_conformance::memory::memory;

    sluice_conformance::queue_conformance_suite!(memory());
}

mod retention {
    use sluice_conformance::memory::memory;

    sluice_conformance::retention_conformance_suite!(memory());
}

mod lost_answer {
    use sluice_conformance::memory::memory;

    sluice_conformance::lost_answer_conformance_suite!(memory());
}

mod objects {
    use sluice_conformance::memory::memory;

    sluice_conformance::objects_conformance_suite!(memory());
}

mod push {
    use sluice_conformance::memory::memory;

    sluice_conformance::push_conformance_suite!(memory());
}
