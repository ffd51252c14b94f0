//! Every conformance suite on the embedded backend (local files + SQLite).

mod store {
    use sluice_conformance::embedded::embedded;
    use sluice_conformance::store::Purge;

    sluice_conformance::store_conformance_suite!(embedded(), Purge::Deletes);
}

mod log {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::log_conformance_suite!(embedded());
}

mod group {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::group_conformance_suite!(embedded());
}

mod queue {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::queue_conformance_suite!(embedded());
}

mod retention {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::retention_conformance_suite!(embedded());
}

mod lost_answer {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::lost_answer_conformance_suite!(embedded());
}

mod objects {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::objects_conformance_suite!(embedded());
}

mod push {
    use sluice_conformance::embedded::embedded;

    sluice_conformance::push_conformance_suite!(embedded());
}
