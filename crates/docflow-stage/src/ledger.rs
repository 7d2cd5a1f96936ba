//! The runtime's delivery ledger over the result store: crash counting for every stage.

use docflow_runtime::ledger::{Claimed, Death, DeliveryKey, DeliveryLedger, LedgerFuture};
use docflow_runtime::metrics::now_ms;
use docflow_store::Deliveries;

/// [`DeliveryLedger`] on the `deliveries` table of the docflow database.
#[derive(Debug, Clone)]
pub struct StoreLedger(pub Deliveries);

impl DeliveryLedger for StoreLedger {
    fn claim<'a>(&'a self, key: &'a DeliveryKey, life: &'a str) -> LedgerFuture<'a, Claimed> {
        Box::pin(async move {
            let c = self
                .0
                .claim(
                    &key.group,
                    &key.topic,
                    key.partition,
                    key.offset,
                    life,
                    now_ms(),
                )
                .await?;
            Ok(Claimed {
                deliveries: c.deliveries,
                deaths: c.deaths,
                convicting: c.convicting,
                alone: c.alone,
            })
        })
    }

    fn set_alone<'a>(
        &'a self,
        key: &'a DeliveryKey,
        life: &'a str,
        alone: bool,
    ) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            self.0
                .set_alone(
                    &key.group,
                    &key.topic,
                    key.partition,
                    key.offset,
                    life,
                    alone,
                )
                .await?;
            Ok(())
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a DeliveryKey,
        life: &'a str,
        finished: bool,
    ) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            self.0
                .release(
                    &key.group,
                    &key.topic,
                    key.partition,
                    key.offset,
                    life,
                    finished,
                )
                .await?;
            Ok(())
        })
    }

    fn record_death<'a>(&'a self, life: &'a str, cause: &'a str) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            self.0.record_death(life, cause, now_ms()).await?;
            Ok(())
        })
    }

    fn deaths<'a>(&'a self, key: &'a DeliveryKey) -> LedgerFuture<'a, Vec<Death>> {
        Box::pin(async move {
            let deaths = self
                .0
                .deaths(&key.group, &key.topic, key.partition, key.offset)
                .await?;
            Ok(deaths
                .into_iter()
                .map(|d| Death {
                    life: d.life,
                    alone: d.alone,
                    in_hand: d.in_hand,
                    cause: d.cause,
                    found_at_ms: d.found_at_ms,
                })
                .collect())
        })
    }
}
