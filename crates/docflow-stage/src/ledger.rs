//! The runtime's delivery ledger over the result store: crash counting for every stage.

use docflow_runtime::ledger::{DeliveryKey, DeliveryLedger, LedgerFuture};
use docflow_runtime::metrics::now_ms;
use docflow_store::Deliveries;

/// [`DeliveryLedger`] on the `deliveries` table of the docflow database.
#[derive(Debug, Clone)]
pub struct StoreLedger(pub Deliveries);

impl DeliveryLedger for StoreLedger {
    fn claim<'a>(&'a self, key: &'a DeliveryKey) -> LedgerFuture<'a, u32> {
        Box::pin(async move {
            let n = self
                .0
                .claim(&key.group, &key.topic, key.partition, key.offset, now_ms())
                .await?;
            Ok(n)
        })
    }

    fn release<'a>(&'a self, key: &'a DeliveryKey, finished: bool) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            self.0
                .release(&key.group, &key.topic, key.partition, key.offset, finished)
                .await?;
            Ok(())
        })
    }
}
